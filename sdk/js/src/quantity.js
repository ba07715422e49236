// Kubernetes quantities, checked as the API server would before a manifest carries them.

const SUFFIXES = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "", "k", "M", "G", "T", "P", "E"];

/** `text` is a Kubernetes quantity above zero ("10Gi", "500m", "1e3"). */
export function isPositiveQuantity(text) {
  const match = /^[0-9.]*/.exec(text);
  const number = match[0];
  const suffix = text.slice(number.length);
  const validNumber =
    number !== "" &&
    number !== "." &&
    (number.match(/\./g) || []).length <= 1 &&
    /[1-9]/.test(number);
  return validNumber && validSuffix(suffix);
}

function validSuffix(suffix) {
  if (SUFFIXES.includes(suffix)) return true;
  return /^[eE][+-]?[0-9]+$/.test(suffix);
}
