"""The base layer every stage reads (ARCHITECTURE.md "Layers"): the dtype table (`dtypes`), source
locations to and from MLIR (`locations`), dynamic-dimension bounds (`shapes`). It imports nothing of
etc but errors.py; nothing here knows about dialects, passes or targets.
"""
