"""What a spec turns into: the rendered FRR configs and node plans, the Containerlab topology, the
clabernetes resources, the multi-host split and the fabric picture."""
