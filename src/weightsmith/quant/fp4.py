"""(codec family 'fp4': filled in by its owner)"""

DEQUANTIZE: dict = {}
QUANTIZE: dict = {}
