package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"

	"github.com/eosink/eosink/committer"
	"github.com/minio/minio-go/v7"
)

// code returns the S3 error code of a raw minio-go error, "" for nil and for
// errors that are not S3 answers. minio.ToErrorResponse does not unwrap, so
// this must see the error as minio-go returned it.
func code(err error) string {
	if err == nil {
		return ""
	}
	return minio.ToErrorResponse(err).Code
}

// transientCode reports whether an S3 answer is worth retrying as it is.
func transientCode(r minio.ErrorResponse) bool {
	switch r.Code {
	case "SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "OperationAborted",
		"ConditionalRequestConflict", // AWS: a concurrent conditional write; retry
		"IncompleteBody", "XAmzContentSHA256Mismatch", "RequestTimeTooSkewed",
		"XMinioServerNotInitialized", "XMinioReadQuorum", "XMinioWriteQuorum", "XMinioStorageFull":
		return true
	}
	return r.StatusCode >= 500 || r.StatusCode == http.StatusTooManyRequests || r.StatusCode == http.StatusRequestTimeout
}

// classify wraps a raw minio-go error with committer.ErrTransient when it is
// worth retrying: network failures, time-outs, 5xx answers and the codes
// above. It must be called on the raw error, before any wrapping.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if r := minio.ToErrorResponse(err); r.Code != "" {
		if transientCode(r) {
			return fmt.Errorf("%w: %w", committer.ErrTransient, err)
		}
		return err
	}
	if errors.Is(err, context.Canceled) {
		return err // the caller gave up; retrying is its decision
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: %w", committer.ErrTransient, err)
	}
	return err
}
