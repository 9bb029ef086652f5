package s3

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/minio/minio-go/v7"
)

var _ committer.Sweeper = (*S3)(nil)

// Leftovers lists this node's incomplete multipart uploads and staging
// objects: see LeftoversOf.
func (s *S3) Leftovers(ctx context.Context) ([]committer.Leftover, error) {
	left, err := s.LeftoversOf(ctx, s.node)
	if err != nil {
		return nil, err
	}
	return left[s.node], nil
}

// LeftoversOf lists the incomplete multipart uploads and staging objects of
// node under this committer's prefix, or of every node when node is "",
// keyed by node.
//
// An upload belongs to a node when its key, relative to the prefix, is a
// part file of the node (…/part-<node>-<checkpoint>-<index>.<ext>), a
// manifest of the node (_manifests/<node>/…) or under _staging/<node>/;
// anything else is never listed. A staging object belongs to the node of
// its _staging/<node>/ folder.
//
// Uploads are listed with an empty prefix and filtered here: MinIO takes a
// ListMultipartUploads prefix as an exact key (a folder prefix lists
// nothing), and answers an empty one from its memory of the uploads
// started since it last started. So on MinIO an upload begun before a
// server restart is not listed; the intents kept until an abort succeeds
// (which Abort resolves by exact key) cover those that eosink recorded.
func (s *S3) LeftoversOf(ctx context.Context, node string) (map[string][]committer.Leftover, error) {
	out := map[string][]committer.Leftover{}
	keyMarker, idMarker := "", ""
	for {
		res, err := s.core.ListMultipartUploads(ctx, s.bucket, "", keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, fmt.Errorf("list uploads: %w", classify(err))
		}
		for _, u := range res.Uploads {
			owner, name, ok := s.owner(u.Key)
			if !ok || (node != "" && owner != node) {
				continue
			}
			out[owner] = append(out[owner], committer.Leftover{Kind: committer.LeftoverUpload, Name: name, Key: u.Key,
				UploadID: u.UploadID, Initiated: u.Initiated.UTC()})
		}
		if !res.IsTruncated || (res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker) {
			break
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}

	folder := s.Key(stagingDir) + "/"
	if node != "" {
		folder += node + "/"
	}
	lctx, cancel := context.WithCancel(ctx) // stops the lister on an early return
	defer cancel()
	for obj := range s.client.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{Prefix: folder, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list staging objects: %w", classify(obj.Err))
		}
		owner, name, ok := s.owner(obj.Key)
		if !ok || (node != "" && owner != node) {
			continue
		}
		out[owner] = append(out[owner], committer.Leftover{Kind: committer.LeftoverObject, Name: name, Key: obj.Key,
			Initiated: obj.LastModified.UTC()})
	}
	for _, l := range out {
		sort.Slice(l, func(i, j int) bool {
			if l[i].Key != l[j].Key {
				return l[i].Key < l[j].Key
			}
			return l[i].UploadID < l[j].UploadID
		})
	}
	return out, nil
}

// owner tells which node made key, and the destination-relative name it
// was made for. ok is false for keys outside the prefix and keys no node
// of eosink's names.
func (s *S3) owner(key string) (node, name string, ok bool) {
	rel := key
	if s.prefix != "" {
		if rel, ok = strings.CutPrefix(key, s.prefix+"/"); !ok {
			return "", "", false
		}
	}
	if strings.HasPrefix(rel, stagingDir+"/") {
		node, name, ok = layout.ParseStagingName(rel)
		return node, name, ok && validName(name)
	}
	if !validName(rel) {
		return "", "", false
	}
	if node, _, ok := layout.ParseManifestName(rel); ok {
		return node, rel, true
	}
	if !strings.Contains(rel, "/") {
		return "", "", false // part files live under <stream>/<partition>/
	}
	if node, _, _, _, ok := layout.ParsePartName(path.Base(rel)); ok {
		return node, rel, true
	}
	return "", "", false
}

// RemoveLeftover aborts an upload or deletes a staging object that
// Leftovers listed. Its key must still be one Leftovers would list, so a
// committed file is never touched: an upload is only ever aborted (which
// leaves the object under its key alone) and an object is only deleted
// under _staging/. One already gone returns committer.ErrNotFound.
func (s *S3) RemoveLeftover(ctx context.Context, l committer.Leftover) error {
	owner, _, ok := s.owner(l.Key)
	if !ok || owner != s.node {
		return fmt.Errorf("remove leftover %s: not this node's", l.Key)
	}
	switch l.Kind {
	case committer.LeftoverUpload:
		if l.UploadID == "" {
			return fmt.Errorf("remove leftover %s: no upload id", l.Key)
		}
		// MinIO answers an abort of an unknown upload with success, so
		// ask first whether it exists, for the caller's count. A listed
		// upload that does not exist (MinIO keeps listing one that a
		// cut-off Complete used up) is aborted all the same: that drops
		// it from MinIO's listing.
		gone := false
		if _, err := s.core.ListObjectParts(ctx, s.bucket, l.Key, l.UploadID, 0, 1); code(err) == minio.NoSuchUpload {
			gone = true
		} else if err != nil {
			return fmt.Errorf("list parts of upload %s of %s: %w", l.UploadID, l.Key, classify(err))
		}
		if err := s.core.AbortMultipartUpload(ctx, s.bucket, l.Key, l.UploadID); err != nil && code(err) != minio.NoSuchUpload {
			return fmt.Errorf("abort upload %s of %s: %w", l.UploadID, l.Key, classify(err))
		}
		if gone {
			return fmt.Errorf("abort upload %s of %s: %w", l.UploadID, l.Key, committer.ErrNotFound)
		}
		return nil
	case committer.LeftoverObject:
		if !strings.HasPrefix(l.Key, s.Key(stagingDir)+"/") {
			return fmt.Errorf("remove leftover %s: not a staging object", l.Key)
		}
		// Stat first: a delete answers the same whether the object was
		// there or not, and the caller counts what it removed.
		if _, err := s.client.StatObject(ctx, s.bucket, l.Key, minio.StatObjectOptions{}); err != nil {
			if code(err) == minio.NoSuchKey {
				return fmt.Errorf("delete staging object %s: %w", l.Key, committer.ErrNotFound)
			}
			return fmt.Errorf("delete staging object %s: %w", l.Key, classify(err))
		}
		if err := s.client.RemoveObject(ctx, s.bucket, l.Key, minio.RemoveObjectOptions{}); err != nil && code(err) != minio.NoSuchKey {
			return fmt.Errorf("delete staging object %s: %w", l.Key, classify(err))
		}
		return nil
	}
	return fmt.Errorf("remove leftover %s: unknown kind %q", l.Key, l.Kind)
}
