"""The read side: listing, time windows, the typed file set, resolution, the ledger and consumers."""
