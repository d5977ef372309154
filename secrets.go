package courier

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// SigningSecretPrefix starts every signing secret: the Standard Webhooks form is "whsec_"
// followed by the key in standard base64.
const SigningSecretPrefix = "whsec_"

// MinSigningKeyBytes is the shortest key a signing secret may carry.
const MinSigningKeyBytes = 16

// SigningKey applies the signing secret rule, the one rule every signing secret follows (queue
// push secrets, business-type callback secrets, a receiver's or task worker's verifier):
// SigningSecretPrefix followed by standard base64 of at least MinSigningKeyBytes bytes. It
// returns the key the secret carries. Its error reads as the end of a sentence that names the
// secret ("secret 0 must start with ...").
func SigningKey(secret string) ([]byte, error) {
	if !strings.HasPrefix(secret, SigningSecretPrefix) {
		return nil, fmt.Errorf("must start with %q", SigningSecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SigningSecretPrefix))
	if err != nil || len(key) < MinSigningKeyBytes {
		return nil, fmt.Errorf("is not base64 of at least %d bytes", MinSigningKeyBytes)
	}
	return key, nil
}

// CheckSigningSecret applies the signing secret rule (SigningKey) to a secret given in a
// request or a configuration: nil, or a validation_failed error naming field, so a secret the
// signer could not use is refused before it is stored rather than failing every delivery
// later.
func CheckSigningSecret(field, secret string) error {
	if _, err := SigningKey(secret); err != nil {
		return badField(field, "%s must be whsec_ followed by base64 of at least %d random bytes", field, MinSigningKeyBytes)
	}
	return nil
}
