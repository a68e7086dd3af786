"""What a run writes and prints: results.json, the summary text and its layout, the HTML report, the
bench page and the outputs' catalogue."""
