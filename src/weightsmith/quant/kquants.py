"""(codec family 'kquants': filled in by its owner)"""

DEQUANTIZE: dict = {}
QUANTIZE: dict = {}
