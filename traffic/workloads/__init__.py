"""Workloads: the traffic an experiment or a test sends. ``probe`` (sequence-numbered UDP flows) is the
only code that builds a probe's command line, for experiments and ``hpnlab.Lab.probes`` alike."""
