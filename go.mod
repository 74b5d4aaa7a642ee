module github.com/m2n-project/m2n

go 1.26

require github.com/BurntSushi/toml v1.6.0
