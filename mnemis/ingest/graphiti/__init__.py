"""``ingest.builder=graphiti``: graphiti-core builds the base graph, Mnemis imports it (:mod:`.builder`).

graphiti-core is imported only inside this package (:mod:`.library` finds the pinned release, :mod:`.run` calls
it); :mod:`.importer` maps its graph into our store from plain records.
"""
