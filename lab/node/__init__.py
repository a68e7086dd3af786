"""Everything that runs inside a lab node, in three rooms:

- ``agents/``: what makes a switch or a host out of a namespace (the ToR and host agents, LACP, ARP ->
  /32 host routes, micro-BFD, the stacked baseline, spraying, FARE on an agg, a node's boot);
- ``programs/``: what experiments and checks start on hosts (job ranks, elephants, probes, the prober);
- this folder: what both use, and the plans the controller computes for a node (plan, qos, sprayrules),
  netlink (rtnl), namespaces, timers' lateness, the slip guard's witness, link counters, reports.

Started as ``python -m hpnlab.node.<room>.X`` in the node's namespace or container, so these modules
import only the standard library and scapy (craft, lazily) - never pydantic, Jinja2, YAML or matplotlib
(tests/test_layers.py). Netlink is the agents' own (rtnl): pyroute2 would be ~17 MiB of each ToR agent.
"""
