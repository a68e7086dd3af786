"""How far to trust a figure: the lateness meter, provenance, the machine's load, and the black-box
prober's planning and tomography."""
