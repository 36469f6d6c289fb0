"""(codec family 'plain': filled in by its owner)"""

DEQUANTIZE: dict = {}
QUANTIZE: dict = {}
