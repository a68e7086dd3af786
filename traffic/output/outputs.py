"""What ``hpnlab run`` writes into its --out folder, each name once: the runner writes them by these names,
and `run --help` and docs/results.md's table name every one (tests/test_outputs_documented.py)."""

RESULTS = "results.json"
SUMMARY = "summary.txt"
PLOT = "plot.png"
TIMELINE = "timeline.png"
REPORT = "report.html"
RAW = "raw"  # a folder: each variant's repetitions' raw reports and its lab's logs

OUTPUTS = (RESULTS, SUMMARY, PLOT, TIMELINE, REPORT, RAW + "/")
