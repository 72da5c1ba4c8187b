"""emem's in-database Python: question analysis, the pipeline profile, the merge and the gather.

Each PL/Python function of the extension is a stub of a few lines that calls into these
modules; the modules take `plpy` and the backend's cache as arguments, so they can be tested
outside the server.
"""
