package preflight

import (
	"crypto/x509"
	"fmt"
	"math"
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// ServedCert is a certificate the API server presented at an address.
type ServedCert struct {
	Address string
	Cert    *x509.Certificate
}

// CertExpiry checks that every certificate the API server serves stays valid
// for at least minValidity; the verdict names the earliest expiring one, and
// is Pending when none could be read.
func CertExpiry(certs []ServedCert, now time.Time, minValidity time.Duration) Verdict {
	var earliest *ServedCert
	for i := range certs {
		if earliest == nil || certs[i].Cert.NotAfter.Before(earliest.Cert.NotAfter) {
			earliest = &certs[i]
		}
	}
	if earliest == nil {
		return Pending(RiskCertificateExpiring, "no certificate of the API server could be read")
	}
	if !earliest.Cert.NotAfter.Before(now.Add(minValidity)) {
		return Passed(RiskCertificateExpiring, "the API server certificate %q served at %s expires at %s, after the required %.0f days",
			earliest.Cert.Subject.CommonName, earliest.Address, earliest.Cert.NotAfter.UTC().Format(time.RFC3339), minValidity.Hours()/24)
	}
	left := earliest.Cert.NotAfter.Sub(now)
	when := fmt.Sprintf("expires in %.1f days", left.Hours()/24)
	if left <= 0 {
		when = fmt.Sprintf("expired %.1f days ago", math.Abs(left.Hours()/24))
	}
	return riskFound(RiskCertificateExpiring, []string{"certificate " + earliest.Cert.Subject.CommonName + " at " + earliest.Address},
		"the API server certificate %q served at %s %s (at %s), less than the required %.0f days: rotate the RKE2 certificates before upgrading, or lower the annotation %s",
		earliest.Cert.Subject.CommonName, earliest.Address, when, earliest.Cert.NotAfter.UTC().Format(time.RFC3339), minValidity.Hours()/24, v1beta1.AnnotationMinCertsExpirationInDay)
}
