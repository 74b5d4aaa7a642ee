package program

import (
	"errors"
	"testing"
)

func TestSettingsResolve(t *testing.T) {
	for _, tc := range []struct {
		in      Settings
		want    Settings
		setting string // the refused setting; "" when it resolves
	}{
		{Settings{Loopback: true}, Settings{Loopback: true, Transport: TransportCopy, Lanes: 4, Comms: 4}, ""},
		{Settings{}, Settings{Transport: TransportAuto, Lanes: 4, Comms: 4}, ""},
		{Settings{Transport: TransportNCCL, Graph: true}, Settings{Transport: TransportNCCL, Lanes: 4, Comms: 4}, ""},
		{Settings{Transport: TransportCopy, Graph: true, Lanes: 2}, Settings{Transport: TransportCopy, Graph: true, Lanes: 2, Comms: 4}, ""},
		{Settings{Transport: TransportAuto, Graph: true, GraphStrict: true}, Settings{Transport: TransportAuto, Graph: true, GraphStrict: true, Lanes: 4, Comms: 4}, ""},
		{Settings{Transport: TransportNCCL, Graph: true, GraphStrict: true}, Settings{}, "graph"},
		{Settings{Loopback: true, Transport: TransportAuto}, Settings{}, "transport"},
		{Settings{Transport: "bogus"}, Settings{}, "transport"},
		{Settings{Lanes: -1}, Settings{}, "lanes"},
		{Settings{Loopback: true, Comms: -2}, Settings{}, "comms"},
	} {
		got, err := tc.in.Resolve()
		var se *SettingError
		switch {
		case tc.setting != "" && (!errors.As(err, &se) || se.Setting != tc.setting):
			t.Errorf("%+v: error %v, want one on %s", tc.in, err, tc.setting)
		case tc.setting == "" && err != nil:
			t.Errorf("%+v: %v", tc.in, err)
		case tc.setting == "" && got != tc.want:
			t.Errorf("%+v resolved to %+v, want %+v", tc.in, got, tc.want)
		}
		if tc.setting == "" {
			again, err := got.Resolve()
			if err != nil || again != got {
				t.Errorf("%+v: resolving again gave %+v, %v", got, again, err)
			}
		}
	}
}
