// Package flagsource evaluates the flags for a replica: a Source is the
// authority.ModeSource the facade asks once per call. It feeds flagd's
// in-process provider from a flags file, the control database or a flagd
// daemon (plaintext or TLS, optionally one of its sources by selector),
// checking every document with flagdoc.Evaluator before it is used, or
// evaluates through any OpenFeature provider (NewOFREPProvider makes the
// one for an OFREP service); it never fails open, and it reports a
// refused document until a valid one loads.
package flagsource
