"""What a run leaves: results.json, summary.md, report.html, plots, pcap summaries, analytical bounds, past runs."""
