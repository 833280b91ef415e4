"""Reports on a table's data: how late it arrives (:mod:`.lateness`) and its HTML page (:mod:`.html`)."""
