"""What `hpnlab status` tells a user to ping: each host's address per rail and each dual-ToR set's subnet."""

from __future__ import annotations

import ipaddress

from hpnlab.model import addresses
from hpnlab.model.spec import load_spec
from hpnlab.traffic.run.experiment import node_configs


def test_every_host_address_lies_in_its_sets_subnet_and_each_set_is_listed_once():
    cfgs = node_configs(load_spec("default"))
    assert addresses.host_addresses(cfgs["s1h0"]) == [
        {"rail": 0, "ip": "10.0.2.2", "subnet": "10.0.2.0/24", "gateway": "10.0.2.1"},
        {"rail": 1, "ip": "10.0.3.2", "subnet": "10.0.3.0/24", "gateway": "10.0.3.1"}]
    assert addresses.cell(cfgs["s1h0"]) == "r0 10.0.2.2, r1 10.0.3.2"
    assert addresses.cell(cfgs["s1r0a"]) == "set 10.0.2.0/24" and addresses.cell(cfgs["agg0-0"]) == ""
    sets = addresses.subnets(cfgs)
    assert [(s["segment"], s["rail"], s["subnet"]) for s in sets] == [
        (0, 0, "10.0.0.0/24"), (0, 1, "10.0.1.0/24"), (1, 0, "10.0.2.0/24"), (1, 1, "10.0.3.0/24")]
    assert sets[2]["tors"] == ["s1r0a", "s1r0b"] and sets[2]["hosts"] == ["s1h0 10.0.2.2", "s1h1 10.0.2.3"]
    for s in sets:
        for h in s["hosts"]:
            assert ipaddress.ip_address(h.split()[1]) in ipaddress.ip_network(s["subnet"])
