"""The Kubernetes runtime: a lab on clabernetes, reached only through ``kubectl``.

``hpnlab up --runtime c9s`` writes the clabernetes objects (``hpnlab generate --target c9s``: a Topology,
or Node + Link objects, and ConfigMaps) and applies them with ``kubectl apply``; clabernetes starts one
launcher pod per node, each node configures itself from its node.json (hpnlab.node.agents.boot), and this
runtime waits for every node's boot report. Everything else (verify, faults, probes, captures,
experiments) goes through the kubectl exec channel (runtime/channel.py): ``kubectl exec`` into the node's
launcher deployment, then ``docker exec`` into the node's container there. Their names, as clabernetes
makes them:

- deployment: from 0.7 (API group c9s.run) the Topology's nodes become Node objects named after the
  containerlab node, and each Node's launcher Deployment is named after the Node (clabernetes 354b414,
  controllers/topology/render.go RenderNodes, controllers/node/deployment.go); before 0.7
  (clabernetes.containerlab.dev) it is ``<topology>-<node>`` (srl-labs/clabernetes 1cc0cbe,
  controllers/topology/deployment.go);
- container: the launcher's own containerlab topology has ``prefix: ""``, so the node's container is
  named after the node (354b414 launcher/materialize.go; 1cc0cbe controllers/topology/definitioncontainerlab.go).

``HPNLAB_C9S_API`` picks the API group (default c9s.run); ``HPNLAB_C9S_DEPLOYMENT`` and
``HPNLAB_C9S_CONTAINER`` override the names (patterns with ``{lab}`` and ``{node}``) for unusual
deployments; ``HPNLAB_C9S_REGISTRY`` prefixes the images (the cluster must be able to pull them).
Clocks differ between pods: agent heartbeats are aged on the pod's own clock, and a gap's length is taken
on one clock (see runtime/channel.py).

What the namespace and Docker runtimes read from this machine (a node's process list for the ``hang``
fault, FRR PIDs for ``status``) is not reachable here; those say so in one line.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from hpnlab.generate import frr
from hpnlab.errors import RuntimeFailure
from hpnlab.model.models import NodeConfig
from hpnlab.machine.proc import run
from hpnlab.machine.progress import Report
from hpnlab.runtime.base import Runtime, register
from hpnlab.runtime.channel import KubectlChannel

KUBECTL = os.environ.get("HPNLAB_KUBECTL", "kubectl")
TIMEOUT = float(os.environ.get("HPNLAB_C9S_TIMEOUT", "900"))
STATUS = "/run/hpnlab/status.json"
BOOT = "/run/hpnlab/boot.json"
DEPLOYMENT = {"c9s.run": "{node}", "clabernetes.containerlab.dev": "{lab}-{node}"}
CONTAINER = "{node}"


def api_group() -> str:
    api = os.environ.get("HPNLAB_C9S_API", "c9s.run")
    if api not in DEPLOYMENT:
        raise RuntimeFailure(f"HPNLAB_C9S_API '{api[:40]}': give one of {', '.join(DEPLOYMENT)}")
    return api


# prints a file and the pod's own clock, so ages are computed on one clock
AGED = "import json,sys,time;print(json.dumps({'now':time.time(),'doc':open(sys.argv[1]).read()}))"


@register
class C9sRuntime(Runtime):
    name = "c9s"
    self_configuring = True
    shares_kernel = False  # the nodes are pods on the cluster's machines
    boot_poll = 2.0  # each look is a kubectl exec per node
    boot_timeout = TIMEOUT

    def __init__(self, lab: str, state=None):
        super().__init__(lab, state)
        st = self.state.data
        self.channel = KubectlChannel(st.k8s_namespace or os.environ.get("HPNLAB_K8S_NAMESPACE"), st.k8s_context,
                                      KUBECTL)

    @classmethod
    def preflight(cls, spec) -> None:
        if not shutil.which(KUBECTL):
            raise RuntimeFailure(f"'{KUBECTL}' not found: the c9s runtime drives a Kubernetes cluster running "
                                 f"clabernetes through kubectl (install it and point it at the cluster)")

    def netns(self, node: str) -> str:
        return f"{self.lab}-{node}"  # a name only: no Linux namespace of the node is on this machine

    def exec_target(self, node: str) -> str:
        api = self.state.data.k8s_api or "c9s.run"
        deployment = os.environ.get("HPNLAB_C9S_DEPLOYMENT", DEPLOYMENT[api])
        container = os.environ.get("HPNLAB_C9S_CONTAINER", CONTAINER)
        return f"{deployment.format(lab=self.lab, node=node)}/{container.format(lab=self.lab, node=node)}"

    def refuse_foreign(self, nodes: list[str]) -> None:
        r = run([*self._kubectl(), "get", "topologies.c9s.run,nodes.c9s.run", "-l", f"hpnlab/lab={self.lab}",
                 "-o", "name"], check=False, timeout=60, what="kubectl get")
        if r.returncode == 0 and r.stdout.strip():
            raise RuntimeFailure(f"clabernetes objects of a lab named '{self.lab}' already exist "
                                 f"({r.stdout.split()[0]}): delete them or choose another lab name")

    def _kubectl(self) -> list[str]:
        ch = self.channel
        return [KUBECTL] + (["--context", ch.context] if ch.context else []) + \
            (["-n", ch.namespace] if ch.namespace else [])

    def extra_files(self, files: dict[str, str], topo) -> dict[str, str]:
        """The clabernetes objects kubectl applies, for the API group HPNLAB_C9S_API names."""
        from hpnlab.generate import c9s

        self.state.data.k8s_api = api_group()
        self.state.save()
        return c9s.export(files, topo, api=self.state.data.k8s_api, namespace=self.state.data.k8s_namespace,
                          registry=os.environ.get("HPNLAB_C9S_REGISTRY") or None)

    @property
    def objects_dir(self) -> Path:
        return self.config_dir / "c9s"

    def create_nodes(self, topo: dict, cfgs: dict[str, NodeConfig], progress: Report) -> None:
        if not self.objects_dir.is_dir():
            raise RuntimeFailure(f"{self.objects_dir} is missing: the lab was rendered without its clabernetes "
                                 f"objects")
        progress(f"kubectl apply: {len(cfgs)} clabernetes nodes (objects in {self.objects_dir})")
        run([*self._kubectl(), "apply", "-f", str(self.objects_dir)], timeout=TIMEOUT, what="kubectl apply")

    def _aged(self, node: str, path: str) -> dict | None:
        r = run(self.exec_argv(node, ["python3", "-c", AGED, path]), check=False, timeout=30)
        if r.returncode != 0:
            return None
        try:
            wrap = json.loads(r.stdout)
            doc = json.loads(wrap["doc"])
        except (ValueError, KeyError, TypeError):
            return None
        doc["age"] = wrap["now"] - doc.get("time", wrap["now"])
        return doc

    def boot_state(self, node: str) -> dict | None:
        return self._aged(node, BOOT)

    def read_status(self, node: str) -> dict | None:
        return self._aged(node, STATUS)

    def agent_alive(self, node: str) -> tuple[bool, str]:
        st = self.read_status(node)  # no process table from here: a fresh heartbeat is the agent alive
        return (st is not None, "heartbeat" if st else "no agent status in the pod")

    def vtysh_argv(self, node: str, commands: list[str], tty: bool = False) -> list[str]:
        return self.channel.argv(self.exec_target(node), frr.vtysh_argv(None, commands), tty=tty)

    def shell_argv(self, node: str, shell: str) -> list[str]:
        return self.channel.argv(self.exec_target(node), [shell], tty=True)

    def netns_pids(self, node: str) -> list[int]:
        raise RuntimeFailure("this needs the node's process list, which kubectl exec does not give this machine "
                             "(the hang fault: use dataplane-dead or power-off on the c9s runtime)")

    def frr_pids(self) -> dict[int, str]:
        return {}

    def destroy(self, progress: Report) -> None:
        if self.objects_dir.is_dir() and shutil.which(KUBECTL):
            progress("kubectl delete: the lab's clabernetes objects")
            run([*self._kubectl(), "delete", "-f", str(self.objects_dir), "--ignore-not-found"], timeout=TIMEOUT,
                what="kubectl delete")
        self.remove_state()
