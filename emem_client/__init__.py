"""emem_client: the thin Python client of emem."""
