"""What happens on a live fabric: processes launched in hosts, faults injected, the job manager's recovery."""
