#!/bin/bash
# What a lab looks like from inside, for a VM run that went wrong (vm/run.py step "diagnose", after
# "up-keep"): per node the addresses, routes, neighbours, nftables, bonds and the agents' last words.
# Reads only; the lab is the default one ("hpn").
lab=${1:-hpn}
for ns in $(ip netns list | awk '{print $1}' | grep "^$lab-" | sort); do
  echo "=================== $ns"
  ip netns exec "$ns" ip -br addr
  echo "--- routes (main, table 10)"
  ip netns exec "$ns" ip -4 route show
  ip netns exec "$ns" ip -4 route show table 10
  echo "--- neighbours"
  ip netns exec "$ns" ip -4 neigh show
  echo "--- nftables"
  ip netns exec "$ns" nft list ruleset 2>&1 | head -40
  ip netns exec "$ns" sh -c 'for b in /proc/net/bonding/*; do [ -e "$b" ] && { echo "--- $b"; cat "$b"; }; done'
  ip netns exec "$ns" sysctl net.ipv4.conf.all.arp_ignore net.ipv4.conf.all.rp_filter 2>/dev/null
done
echo "=================== agent logs"
for f in /run/hpnlab/$lab/logs/*agent*.log; do echo "--- $f"; tail -n 15 "$f"; done
