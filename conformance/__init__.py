"""Conformance suite for collective-bucketing passes.

    pytest --pyargs conformance --bucketing-pass=project|torch|identity|module:object

The catalog (catalog.py) is data; the tests in multiproc/ and codegen_checks/
check every case against the selected pass (adapters.py).
"""
