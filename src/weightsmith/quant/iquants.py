"""(codec family 'iquants': filled in by its owner)"""

DEQUANTIZE: dict = {}
QUANTIZE: dict = {}
