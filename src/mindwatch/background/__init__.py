"""The monitor's other threads and what they bring in: hardware samples, hangs (with every
thread's stack) and signals."""
