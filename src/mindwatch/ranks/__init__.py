"""What the ranks of a job decide together: one stop for all, stragglers, rewinds at the same
step. The exchange itself is the adapter's collective."""
