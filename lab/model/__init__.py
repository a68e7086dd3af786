"""The lab as data: the spec and its checks, the models, addresses, sizing (calc, capacity, QoS),
time dilation and the fabric's topology. Pure: no root, no processes."""
