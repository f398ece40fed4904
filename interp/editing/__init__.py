"""Layer 2, weight editing: the edit protocol (apply / revert bit for bit / save / load), ROME, FT-L, the
before/after evaluation and the fact records. Imports core and analyses; ``interp.rome`` is its public face.
"""
