"""ivmflow's connectors: update sources and delta / snapshot / dead-letter sinks (files
now; Kafka plugs in through the protocols of :mod:`connectors.base`), and the synthetic
stream generators.

Example:
    >>> from connectors.files import CollectingSink
    >>> CollectingSink().deltas
    []
"""
