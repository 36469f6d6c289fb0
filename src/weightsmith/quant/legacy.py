"""(codec family 'legacy': filled in by its owner)"""

DEQUANTIZE: dict = {}
QUANTIZE: dict = {}
