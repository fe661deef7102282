package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
)

// outputFlags are kubectl's -o for what a command prints: its own text
// view by default; json, yaml, jsonpath=, jsonpath-file=, go-template=,
// go-template-file= (with --template and --allow-missing-template-keys) as
// cli-runtime prints them; custom-columns=HEADER:.path,...; and name, where
// the command shows one object.
type outputFlags struct {
	format string
	text   string // the name of the command's own view ("" when -o is left out)
	named  bool
	print  *genericclioptions.PrintFlags
}

// customColumns is the -o prefix of a table of chosen fields.
const customColumns = "custom-columns"

// addOutputFlags gives cmd -o; text is the name of the default view, named
// whether the command shows one object -o name can name.
func addOutputFlags(cmd *cobra.Command, text string, named bool) *outputFlags {
	o := &outputFlags{format: text, text: text, named: named, print: genericclioptions.NewPrintFlags("")}
	o.print.OutputFormat = &o.format
	cmd.Flags().StringVarP(&o.format, "output", "o", text, "output format: "+strings.Join(o.formats(), ", "))
	o.print.TemplatePrinterFlags.AddFlags(cmd)
	return o
}

// formats are what -o takes.
func (o *outputFlags) formats() []string {
	f := []string{"json", "yaml"}
	if o.named {
		f = append(f, "name")
	}
	f = append(f, o.print.TemplatePrinterFlags.AllowedFormats()...)
	f = append(f, customColumns)
	if o.text != "" {
		f = append([]string{o.text}, f...)
	}
	return f
}

// isText tells whether the command shows its own view.
func (o *outputFlags) isText() bool { return o.format == o.text }

// printer checks -o and returns how to print the command's data; nil for
// the command's own view. A bad -o is a usage error.
func (o *outputFlags) printer() (printers.ResourcePrinter, error) {
	if o.isText() {
		return nil, nil
	}
	if spec, ok := strings.CutPrefix(o.format, customColumns+"="); ok {
		return newColumnsPrinter(spec)
	}
	if o.named && o.format == "name" {
		return &printers.NamePrinter{}, nil
	}
	p, err := o.print.JSONYamlPrintFlags.ToPrinter(o.format)
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		p, err = o.print.TemplatePrinterFlags.ToPrinter(o.format)
	}
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		err = fmt.Errorf("use one of %s", strings.Join(o.formats(), ", "))
	}
	if err != nil {
		return nil, usageError("-o %q: %v", o.format, err)
	}
	return p, nil
}

// printData prints data with p; named is the object -o name names.
func printData(w io.Writer, p printers.ResourcePrinter, data any, named runtime.Object) error {
	if _, ok := p.(*printers.NamePrinter); ok {
		return p.PrintObj(named, w)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return p.PrintObj(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}, w)
}

// columnsPrinter prints -o custom-columns: a header, then one row of the
// chosen fields, values of a field that has several joined by commas.
type columnsPrinter struct {
	headers []string
	paths   []*jsonpath.JSONPath
}

func newColumnsPrinter(spec string) (*columnsPrinter, error) {
	p := &columnsPrinter{}
	for col := range strings.SplitSeq(spec, ",") {
		header, path, ok := strings.Cut(col, ":")
		if !ok || header == "" || path == "" {
			return nil, usageError("-o custom-columns: %q is not HEADER:.path (e.g. -o custom-columns=PLAN:.plan,PHASE:.phase)", col)
		}
		jp := jsonpath.New(header).AllowMissingKeys(true)
		if !strings.HasPrefix(path, "{") {
			path = "{" + path + "}"
		}
		if err := jp.Parse(path); err != nil {
			return nil, usageError("-o custom-columns: column %s: %v", header, err)
		}
		p.headers = append(p.headers, header)
		p.paths = append(p.paths, jp)
	}
	return p, nil
}

// PrintObj implements printers.ResourcePrinter.
func (p *columnsPrinter) PrintObj(obj runtime.Object, w io.Writer) error {
	u, ok := obj.(*runtime.Unknown)
	if !ok {
		return fmt.Errorf("custom-columns: cannot print %T", obj)
	}
	var data any
	if err := json.Unmarshal(u.Raw, &data); err != nil {
		return err
	}
	row := make([]string, 0, len(p.paths))
	for i, jp := range p.paths {
		results, err := jp.FindResults(data)
		if err != nil {
			return fmt.Errorf("custom-columns: column %s: %w", p.headers[i], err)
		}
		var values []string
		for _, set := range results {
			for _, v := range set {
				values = append(values, fmt.Sprint(v.Interface()))
			}
		}
		row = append(row, strings.Join(slices.DeleteFunc(values, func(s string) bool { return s == "" }), ","))
		if row[i] == "" {
			row[i] = "<none>"
		}
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	if _, err := fmt.Fprintln(tw, strings.Join(p.headers, "\t")); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(tw, strings.Join(row, "\t")); err != nil {
		return err
	}
	return tw.Flush()
}
