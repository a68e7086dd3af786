"""The agents that make a switch or a host out of a namespace: the ToR and host agents, LACP,
micro-BFD, the stacked baseline, spraying, FARE on an agg, the launcher and a node's boot."""
