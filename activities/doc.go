// Package activities holds courier's Temporal activities: the side effects workflows order
// (reading and updating rows, publishing, calling out). Each is a method on a struct whose
// dependencies are injected; errors are classified here, permanent ones as non-retryable
// application errors with an exported type. Their names, params, results and error types are
// in activities/contract, which the workflows import instead of this package.
package activities
