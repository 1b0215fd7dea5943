"""What state steps measure: per-layer weight, update, gradient and moment norms."""
