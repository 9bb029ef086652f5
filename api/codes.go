package api

// Error codes: the "error" of every error answer (DESIGN "HTTP API v1"), one
// const each. TestErrorCodes holds them equal to the enum of
// components/schemas/Error in openapi.yaml, and client.TestErrorCodes the
// codes the Go client knows to them.
const (
	CodeInvalidJSON            = "invalid_json"
	CodeInvalidStream          = "invalid_stream"
	CodeInvalidProducerHeaders = "invalid_producer_headers"
	CodeInvalidProducer        = "invalid_producer"
	CodeInvalidWait            = "invalid_wait"
	CodeInvalidBody            = "invalid_body"
	CodeInvalidID              = "invalid_id"
	CodeInvalidLimit           = "invalid_limit"
	CodeInvalidPrefix          = "invalid_prefix"
	CodeInvalidNode            = "invalid_node"
	CodeInvalidPath            = "invalid_path"
	CodeInvalidCursor          = "invalid_cursor"
	CodeInvalidPartition       = "invalid_partition"
	CodeSchemaMismatch         = "schema_mismatch"
	CodeUnknownProducer        = "unknown_producer"
	CodeProducerFenced         = "producer_fenced"
	CodeInvalidEpoch           = "invalid_epoch"
	CodeOutOfOrderSequence     = "out_of_order_sequence"
	CodeIdempotencyKeyReused   = "idempotency_key_reused"
	CodeProducerBusy           = "producer_busy"
	CodeProducerDamaged        = "producer_damaged"
	CodeTooLarge               = "too_large"
	CodeUnsupportedMediaType   = "unsupported_media_type"
	CodeUnsupportedEncoding    = "unsupported_encoding"
	CodeBodyTimeout            = "body_timeout"
	CodeTooManyAuthFailures    = "too_many_auth_failures"
	CodeRangeNotSatisfiable    = "range_not_satisfiable"
	CodeBackpressure           = "backpressure"
	CodeInsufficientStorage    = "insufficient_storage"
	CodeNotReady               = "not_ready"
	CodeShuttingDown           = "shutting_down"
	CodeFailed                 = "failed"
	CodeAborted                = "aborted"
	CodeUnauthorized           = "unauthorized"
	CodeForbidden              = "forbidden"
	CodeNotFound               = "not_found"
	CodeMethodNotAllowed       = "method_not_allowed"
	CodeInternal               = "internal"
)

// ErrorCodes lists every code, in the document's order.
var ErrorCodes = []string{
	CodeInvalidJSON,
	CodeInvalidStream,
	CodeInvalidProducerHeaders,
	CodeInvalidProducer,
	CodeInvalidWait,
	CodeInvalidBody,
	CodeInvalidID,
	CodeInvalidLimit,
	CodeInvalidPrefix,
	CodeInvalidNode,
	CodeInvalidPath,
	CodeInvalidCursor,
	CodeInvalidPartition,
	CodeSchemaMismatch,
	CodeUnknownProducer,
	CodeProducerFenced,
	CodeInvalidEpoch,
	CodeOutOfOrderSequence,
	CodeIdempotencyKeyReused,
	CodeProducerBusy,
	CodeProducerDamaged,
	CodeTooLarge,
	CodeUnsupportedMediaType,
	CodeUnsupportedEncoding,
	CodeBodyTimeout,
	CodeTooManyAuthFailures,
	CodeRangeNotSatisfiable,
	CodeBackpressure,
	CodeInsufficientStorage,
	CodeNotReady,
	CodeShuttingDown,
	CodeFailed,
	CodeAborted,
	CodeUnauthorized,
	CodeForbidden,
	CodeNotFound,
	CodeMethodNotAllowed,
	CodeInternal,
}
