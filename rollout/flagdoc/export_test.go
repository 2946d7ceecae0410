package flagdoc

// NoReason is noReason, for the external tests.
const NoReason = noReason
