"""HTTP routes of the coordinator, one module per resource."""
