"""Reading what a protected step left on the device, once per step."""
