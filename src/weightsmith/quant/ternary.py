"""(codec family 'ternary': filled in by its owner)"""

DEQUANTIZE: dict = {}
QUANTIZE: dict = {}
