module wallclock-fence

go 1.26
