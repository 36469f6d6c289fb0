"""(codec family 'kquants_qx': filled in by its owner)"""

DEQUANTIZE: dict = {}
QUANTIZE: dict = {}
