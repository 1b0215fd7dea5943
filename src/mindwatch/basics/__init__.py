"""Small things every part uses: clocks, units, number and text formats, argument checks,
the rank from the environment, the run directory's layout."""
