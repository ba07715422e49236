"""The Kubernetes quantity grammar ("500m", "1.5Gi", "1e3"), checked because an API server
without the CRD schema lets any string through and the Pod or PVC would then be refused."""

_SUFFIXES = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "", "k", "M", "G", "T", "P", "E"}


def is_positive_quantity(text: str) -> bool:
    end = 0
    while end < len(text) and (text[end] in "0123456789."):
        end += 1
    number, suffix = text[:end], text[end:]
    valid_number = (
        number != ""
        and number != "."
        and number.count(".") <= 1
        and any(c in "123456789" for c in number)
    )
    return valid_number and _valid_suffix(suffix)


def _valid_suffix(suffix: str) -> bool:
    if suffix in _SUFFIXES:
        return True
    if not suffix or suffix[0] not in "eE":
        return False
    digits = suffix[1:]
    if digits[:1] in ("+", "-"):
        digits = digits[1:]
    return digits != "" and all(c in "0123456789" for c in digits)
