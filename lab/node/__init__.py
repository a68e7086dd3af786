"""Everything that runs inside a lab node: the ToR and host agents (LACP, ARP -> /32 host routes), the
probe sender/receiver, the ring all-reduce and the scapy tools. Started as ``python -m hpnlab.node.X``
in the node's namespace or container, so these modules import only the standard library and scapy
(craft, lazily) - never pydantic, Jinja2, YAML or matplotlib (tests/test_layers.py). Netlink is the
agents' own (rtnl): pyroute2 would be ~17 MiB of each ToR agent.
"""
