"""The exec channel: how a command reaches a node, and nothing else. Faults, probes, captures, route
monitors, vtysh and verify all go through ``Runtime.exec_argv``, which asks the runtime's channel, so
the experiments run unchanged wherever the lab runs.

- ``NetnsChannel``: ``ip netns exec <ns>`` (namespaces, and containerlab's /run/netns links): the
  command runs from this machine's filesystem, so it writes its reports here directly.
- ``DockerChannel``: ``docker exec <container>``: inside the container's own filesystem.
- ``KubectlChannel``: ``kubectl exec`` into the clabernetes launcher pod of the node, then ``docker
  exec`` into the node's container there. Files stay in the pod: tools print their report and
  captures stream the pcap on standard output (``remote`` tells callers so).

A remote channel runs the image's ``python3`` (which has hpnlab.node) where this machine's own
interpreter was named. Clocks: in a cluster each pod has its own. A gap's length is the difference of
two timestamps of one clock (the sending pod's, carried in the probes: evenly spaced, so no receive
jitter), so an offset between pods cancels; attributing a gap to a fault compares it with this
machine's clock, which across pods is only as good as their time sync (NTP).
"""

from __future__ import annotations

import sys


class Channel:
    name = "base"
    remote = False  # True: the command's files are not on this machine

    def argv(self, target: str, argv: list[str]) -> list[str]:
        raise NotImplementedError

    def _py(self, argv: list[str]) -> list[str]:
        return ["python3", *argv[1:]] if self.remote and argv and argv[0] == sys.executable else list(argv)


class NetnsChannel(Channel):
    name = "netns"

    def argv(self, target: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", target, *argv]


class DockerChannel(Channel):
    name = "docker"
    remote = True

    def __init__(self, docker: str = "docker"):
        self.docker = docker

    def argv(self, target: str, argv: list[str], tty: bool = False) -> list[str]:
        return [self.docker, "exec", *(["-it"] if tty else ["-i"]), target, *self._py(argv)]


class KubectlChannel(Channel):
    """``kubectl [--context C] -n NS exec -i deploy/<topology>-<node> -- docker exec -i <container> ...``"""

    name = "kubectl"
    remote = True

    def __init__(self, namespace: str | None, context: str | None = None, kubectl: str = "kubectl"):
        self.namespace, self.context, self.kubectl = namespace, context, kubectl

    def argv(self, target: str, argv: list[str], tty: bool = False) -> list[str]:
        deployment, container = target.split("/", 1)
        base = [self.kubectl] + (["--context", self.context] if self.context else []) + \
            (["-n", self.namespace] if self.namespace else [])
        flag = "-it" if tty else "-i"
        return [*base, "exec", flag, f"deploy/{deployment}", "--", "docker", "exec", flag, container, *self._py(argv)]
