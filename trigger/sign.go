package trigger

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// SignatureHeader carries a webhook delivery's signature: "sha256=" and the hex HMAC-SHA256 of
// the raw body with the hook's secret. DeliveryHeader carries the sender's id of the delivery,
// the same in every retry of it.
const (
	SignatureHeader = "X-Reins-Signature"
	DeliveryHeader  = "X-Reins-Delivery"
)

// Sign returns the signature of body with secret, as SignatureHeader carries it.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig (the header's value: "sha256=HEX", or HEX) is the signature of
// body with secret. It compares in constant time, and an empty secret verifies nothing.
func Verify(secret, body []byte, sig string) bool {
	if len(secret) == 0 {
		return false
	}
	sig = strings.TrimSpace(sig)
	sig = strings.TrimPrefix(sig, "sha256=")
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}
