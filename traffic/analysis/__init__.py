"""Figures from measurements, pure: outage gaps, timelines, reordering, retransmits, gray-failure
figures, queue rates, rings, the dilation fit, the slip guard's verdicts and baseline comparison."""
