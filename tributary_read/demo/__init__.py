"""``trib demo``: a day of late-arriving logs, an hourly job run two ways, and the lateness report."""
