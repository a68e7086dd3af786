"""What an experiment drives on a lab: the experiment file, jobs, isolation, impairments, the prober,
route monitors, the live feed, fault and gray watches, node tools, bulk runs and the path checks."""
