// Package flagdoc is the flags document: the state of every mode and kill
// switch (Flags), its rendering to flagd's JSON format and parsing back
// (docs/flags.md), the rule its version follows, the stores it is kept in
// (a file, the control database, or flags reservoir does not write), and
// flagd's evaluator, the one evaluator of the flags in reservoir
// (Evaluator, Flags.Resolve).
package flagdoc
