"""A lab's life on a runtime: bring-up, rollback and teardown (orchestrate), the health checks (verify),
each node's and the fabric's state for `status` and the live view, and FARE's weights as verify reads
them."""
