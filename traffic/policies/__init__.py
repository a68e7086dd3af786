"""Scheduling policies for concurrent jobs (workload kind ``jobs``): one file each, registered by name. A
policy turns the jobs' priorities, contention and path candidates into an assignment: per job its level
(0 the highest), DSCP and queue, and per connection the path (source port) it takes."""

from hpnlab.traffic.policies.base import REGISTRY, Policy, get, names  # noqa: F401
from hpnlab.traffic.policies import crux, fifo, reversed_order  # noqa: F401 (they register themselves)
from hpnlab.traffic.policies import sincronia, cassini  # noqa: F401,I001 (the published baselines, after them)
