"""The programs experiments and checks start on nodes (``python -m hpnlab.node.programs.NAME``): the job
ranks (allreduce, alltoall, with jobrun's shared life and rail join), elephants, the probe sender and
receiver, the black-box prober, the scapy tools (craft), a user's command and the reachability check."""
