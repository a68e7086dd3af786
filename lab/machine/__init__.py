"""The machine a lab runs on, below every runtime: processes started and stopped by PID, signals,
progress output, the kernel's shared settings and neighbour table, FRR's vty sockets, and applying a
node's plan (sysctls, addresses, nftables) inside its namespace."""
