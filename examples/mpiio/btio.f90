! btio.f90 -- NAS BT-IO-like test in Fortran 90 (use mpi).
!
! A grid of N^3 cells with 5 double precision values each, stored as the
! Fortran array u(5,N,N,N), is block-decomposed over the ranks with
! MPI_Dims_create(nprocs, 3).  Each time step the whole grid is appended to
! the file at displacement step*N^3*40 through a file view made with
! MPI_Type_create_subarray(..., MPI_ORDER_FORTRAN, ...) and written with
! MPI_File_write_all (or MPI_File_write when "independent" is given).  All
! steps are then read back with the same view and verified.  The file layout
! (and the values) are identical to btio.c, so files can be cross-checked.
!
! Value of component c (1..5) of cell (x,y,z) (1-based) at step s (0-based):
!     ((((s*N + z-1)*N + y-1)*N + x-1)*5 + c-1) + 1/8
!
! usage: btio-f90 FILE [GRID [STEPS [collective|independent [both|write|read]]]]
!        defaults: GRID 64, STEPS 10, collective, both
! FILE is passed unchanged to MPI_File_open.  Rank 0 prints one JSON line.
program btio_f
  use mpi
  implicit none

  integer, parameter :: dp = kind(1.0d0)
  integer, parameter :: i8 = selected_int_kind(18)
  integer, parameter :: stderr = 0
  integer :: ierr, rank, nprocs, d, nargs
  integer :: dims(3), coords(3), gsizes(4), subsizes(4), starts(4)
  integer :: n, steps, s, x, y, z, c, base, rem, lx, ly, lz, nvals, got
  integer :: fh, filetype, amode
  integer :: status(MPI_STATUS_SIZE)
  integer(kind=MPI_OFFSET_KIND) :: disp, step_bytes, fsize
  integer(i8) :: idx, errors, total_errors, nbad
  logical :: independent, do_write, do_read
  character(len=4096) :: path
  character(len=64) :: arg, iomode, mode
  real(dp), allocatable :: u(:,:,:,:)
  real(dp) :: t0, wtime, rtime, expect, total_bytes
  character(len=9000) :: line

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)

  n = 64
  steps = 10
  iomode = 'collective'
  mode = 'both'
  nargs = command_argument_count()
  if (nargs >= 1) call get_command_argument(1, path)
  if (nargs < 1 .or. path == '--help' .or. path == '-h') then
     if (rank == 0) then
        write(*,'(a)') 'usage: btio-f90 FILE [GRID [STEPS [collective|independent [both|write|read]]]]'
        write(*,'(a)') '  FILE is passed unchanged to MPI_File_open (e.g. stripefs:/dir/file)'
        write(*,'(a)') '  GRID  grid of GRID^3 cells, 5 doubles each (default 64)'
        write(*,'(a)') '  STEPS time steps appended to the file (default 10)'
        write(*,'(a)') '  collective (MPI_File_write_all/read_all, default) or independent'
        write(*,'(a)') '  both (default), write or read'
     end if
     call MPI_Finalize(ierr)
     if (nargs < 1) stop 2
     stop
  end if
  if (nargs >= 2) then
     call get_command_argument(2, arg)
     n = parse_int(arg, 'GRID')
  end if
  if (nargs >= 3) then
     call get_command_argument(3, arg)
     steps = parse_int(arg, 'STEPS')
  end if
  if (nargs >= 4) call get_command_argument(4, iomode)
  if (nargs >= 5) call get_command_argument(5, mode)
  if (iomode /= 'collective' .and. iomode /= 'independent') call usage_fail('bad io mode '//trim(iomode))
  if (mode /= 'both' .and. mode /= 'write' .and. mode /= 'read') call usage_fail('bad mode '//trim(mode))
  if (nargs > 5) call usage_fail('too many arguments')
  independent = (iomode == 'independent')
  do_write = (mode /= 'read')
  do_read = (mode /= 'write')

  ! decomposition: dims(1) splits z, dims(2) y, dims(3) x (like btio.c)
  dims = 0
  call MPI_Dims_create(nprocs, 3, dims, ierr)
  call check(ierr, 'MPI_Dims_create')
  if (maxval(dims) > n) call usage_fail('GRID must be at least the largest process-grid extent')
  coords(1) = rank / (dims(2) * dims(3))
  coords(2) = mod(rank / dims(3), dims(2))
  coords(3) = mod(rank, dims(3))
  ! subarray dimensions in Fortran order: (component, x, y, z)
  gsizes = (/ 5, n, n, n /)
  subsizes(1) = 5
  starts(1) = 0
  do d = 1, 3
     base = n / dims(d)
     rem = mod(n, dims(d))
     ! d=1 (z) -> array dim 4, d=2 (y) -> dim 3, d=3 (x) -> dim 2
     if (coords(d) < rem) then
        subsizes(5 - d) = base + 1
        starts(5 - d) = coords(d) * base + coords(d)
     else
        subsizes(5 - d) = base
        starts(5 - d) = coords(d) * base + rem
     end if
  end do
  lx = subsizes(2)
  ly = subsizes(3)
  lz = subsizes(4)
  nvals = 5 * lx * ly * lz
  allocate(u(5, lx, ly, lz))

  call MPI_Type_create_subarray(4, gsizes, subsizes, starts, MPI_ORDER_FORTRAN, &
       MPI_DOUBLE_PRECISION, filetype, ierr)
  call check(ierr, 'MPI_Type_create_subarray')
  call MPI_Type_commit(filetype, ierr)
  call check(ierr, 'MPI_Type_commit')

  call MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN, ierr)
  call check(ierr, 'MPI_File_set_errhandler(MPI_FILE_NULL)')

  step_bytes = int(n, MPI_OFFSET_KIND)**3 * 40_MPI_OFFSET_KIND
  total_bytes = real(step_bytes, dp) * real(steps, dp)
  wtime = 0.0_dp
  rtime = 0.0_dp
  errors = 0

  if (do_write) then
     amode = ior(MPI_MODE_CREATE, MPI_MODE_WRONLY)
     call MPI_File_open(MPI_COMM_WORLD, trim(path), amode, MPI_INFO_NULL, fh, ierr)
     call check(ierr, 'MPI_File_open("'//trim(path)//'") for writing')
     call MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN, ierr)
     call check(ierr, 'MPI_File_set_errhandler')
     do s = 0, steps - 1
        call fill(s)
        call MPI_Barrier(MPI_COMM_WORLD, ierr)
        call check(ierr, 'MPI_Barrier')
        t0 = MPI_Wtime()
        disp = int(s, MPI_OFFSET_KIND) * step_bytes
        call MPI_File_set_view(fh, disp, MPI_DOUBLE_PRECISION, filetype, 'native', &
             MPI_INFO_NULL, ierr)
        call check(ierr, 'MPI_File_set_view')
        if (independent) then
           call MPI_File_write(fh, u, nvals, MPI_DOUBLE_PRECISION, status, ierr)
           call check(ierr, 'MPI_File_write')
        else
           call MPI_File_write_all(fh, u, nvals, MPI_DOUBLE_PRECISION, status, ierr)
           call check(ierr, 'MPI_File_write_all')
        end if
        call check_count('write')
        if (s == steps - 1) then
           call MPI_File_sync(fh, ierr)
           call check(ierr, 'MPI_File_sync')
        end if
        call MPI_Barrier(MPI_COMM_WORLD, ierr)
        call check(ierr, 'MPI_Barrier')
        wtime = wtime + (MPI_Wtime() - t0)
     end do
     call MPI_File_close(fh, ierr)
     call check(ierr, 'MPI_File_close')
  end if

  if (do_read) then
     call MPI_File_open(MPI_COMM_WORLD, trim(path), MPI_MODE_RDONLY, MPI_INFO_NULL, fh, ierr)
     call check(ierr, 'MPI_File_open("'//trim(path)//'") for reading')
     call MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN, ierr)
     call check(ierr, 'MPI_File_set_errhandler')
     call MPI_File_get_size(fh, fsize, ierr)
     call check(ierr, 'MPI_File_get_size')
     if (fsize < int(steps, MPI_OFFSET_KIND) * step_bytes) then
        if (rank == 0) write(stderr,'(a,i0,a,i0,a)') 'btio.f90: VERIFY FAILED: file has ', &
             fsize, ' bytes, need ', int(steps, MPI_OFFSET_KIND) * step_bytes, ' bytes'
        errors = errors + 1
     end if
     do s = 0, steps - 1
        if (errors /= 0) exit
        u = -1.0_dp
        call MPI_Barrier(MPI_COMM_WORLD, ierr)
        call check(ierr, 'MPI_Barrier')
        t0 = MPI_Wtime()
        disp = int(s, MPI_OFFSET_KIND) * step_bytes
        call MPI_File_set_view(fh, disp, MPI_DOUBLE_PRECISION, filetype, 'native', &
             MPI_INFO_NULL, ierr)
        call check(ierr, 'MPI_File_set_view')
        if (independent) then
           call MPI_File_read(fh, u, nvals, MPI_DOUBLE_PRECISION, status, ierr)
           call check(ierr, 'MPI_File_read')
        else
           call MPI_File_read_all(fh, u, nvals, MPI_DOUBLE_PRECISION, status, ierr)
           call check(ierr, 'MPI_File_read_all')
        end if
        call check_count('read (short read / EOF?)')
        call MPI_Barrier(MPI_COMM_WORLD, ierr)
        call check(ierr, 'MPI_Barrier')
        rtime = rtime + (MPI_Wtime() - t0)
        ! verify (not timed)
        nbad = 0
        do z = 1, lz
           do y = 1, ly
              do x = 1, lx
                 idx = ((((int(s, i8) * n + (starts(4) + z - 1)) * n + (starts(3) + y - 1)) &
                      * n + (starts(2) + x - 1)) * 5)
                 do c = 1, 5
                    expect = real(idx + c - 1, dp) + 0.125_dp
                    if (u(c, x, y, z) /= expect) then
                       if (nbad == 0) write(stderr,'(a,i0,a,i0,a,i0,a,i0,a,i0,a,i0,a,es24.16,a,es24.16)') &
                            'btio.f90: rank ', rank, ': VERIFY FAILED: step ', s, ' cell (x=', &
                            starts(2) + x - 1, ',y=', starts(3) + y - 1, ',z=', starts(4) + z - 1, &
                            ') component ', c - 1, ': expected ', expect, ' got ', u(c, x, y, z)
                       nbad = nbad + 1
                    end if
                 end do
              end do
           end do
        end do
        if (nbad /= 0) write(stderr,'(a,i0,a,i0,a,i0,a,i0,a)') 'btio.f90: rank ', rank, &
             ': step ', s, ': ', nbad, ' of ', nvals, ' values wrong'
        errors = errors + nbad
     end do
     call MPI_File_close(fh, ierr)
     call check(ierr, 'MPI_File_close')
  end if

  call MPI_Allreduce(errors, total_errors, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(ierr, 'MPI_Allreduce')
  call MPI_Type_free(filetype, ierr)
  call check(ierr, 'MPI_Type_free')
  deallocate(u)

  if (rank == 0) then
     if (total_errors /= 0) then
        write(stderr,'(a,i0,a)') 'btio.f90: FAILED: ', total_errors, ' verification errors'
     else
        write(line,'(a,a,a,i0,a,i0,a,i0,a,i0,a,i0,a,i0,a,a,a,a,a,a)') &
             '{"program":"btio.f90","path":', trim(json_quote(trim(path))), ',"nprocs":', nprocs, &
             ',"grid":', n, ',"steps":', steps, ',"dims":[', dims(1), ',', dims(2), ',', &
             dims(3), '],"io":"', trim(iomode), '","mode":"', trim(mode), '","bytes":', &
             trim(fmt_real(total_bytes, 0))
        if (do_write) line = trim(line)//',"write_s":'//trim(fmt_real(wtime, 6))// &
             ',"write_mib_s":'//trim(fmt_real(mibs(total_bytes, wtime), 2))
        if (do_read) line = trim(line)//',"read_s":'//trim(fmt_real(rtime, 6))// &
             ',"read_mib_s":'//trim(fmt_real(mibs(total_bytes, rtime), 2))//',"verified":true'
        write(*,'(a)') trim(line)//'}'
     end if
  end if
  call MPI_Finalize(ierr)
  if (total_errors /= 0) stop 1

contains

  subroutine fill(step)
    integer, intent(in) :: step
    integer :: i, j, k, cc
    integer(i8) :: base_idx
    do k = 1, lz
       do j = 1, ly
          do i = 1, lx
             base_idx = ((((int(step, i8) * n + (starts(4) + k - 1)) * n + (starts(3) + j - 1)) &
                  * n + (starts(2) + i - 1)) * 5)
             do cc = 1, 5
                u(cc, i, j, k) = real(base_idx + cc - 1, dp) + 0.125_dp
             end do
          end do
       end do
    end do
  end subroutine fill

  subroutine check(rc, what)
    integer, intent(in) :: rc
    character(len=*), intent(in) :: what
    character(len=MPI_MAX_ERROR_STRING) :: msg
    integer :: mlen, ierr2
    if (rc /= MPI_SUCCESS) then
       call MPI_Error_string(rc, msg, mlen, ierr2)
       write(stderr,'(a,i0,a,a,a,a)') 'btio.f90: rank ', rank, ': ', what, ' failed: ', msg(1:mlen)
       call MPI_Abort(MPI_COMM_WORLD, 2, ierr2)
       stop 2
    end if
  end subroutine check

  subroutine check_count(what)
    character(len=*), intent(in) :: what
    integer :: ierr2
    call MPI_Get_count(status, MPI_DOUBLE_PRECISION, got, ierr2)
    call check(ierr2, 'MPI_Get_count')
    if (got /= nvals) then
       write(stderr,'(a,i0,a,a,a,i0,a,i0)') 'btio.f90: rank ', rank, ': ', what, &
            ' transferred ', got, ' values, expected ', nvals
       call MPI_Abort(MPI_COMM_WORLD, 2, ierr2)
       stop 2
    end if
  end subroutine check_count

  subroutine usage_fail(msg)
    character(len=*), intent(in) :: msg
    integer :: ierr2
    if (rank == 0) write(stderr,'(a,a,a)') 'btio.f90: ', msg, ' (try --help)'
    call MPI_Finalize(ierr2)
    stop 2
  end subroutine usage_fail

  integer function parse_int(text, what)
    character(len=*), intent(in) :: text, what
    integer :: ios
    read(text, *, iostat=ios) parse_int
    if (ios /= 0 .or. parse_int < 1) call usage_fail('bad '//what//' value '//trim(text))
  end function parse_int

  real(dp) function mibs(bytes, secs)
    real(dp), intent(in) :: bytes, secs
    if (secs > 0.0_dp) then
       mibs = bytes / 1048576.0_dp / secs
    else
       mibs = 0.0_dp
    end if
  end function mibs

  ! fixed-point number with a leading zero (JSON needs "0.5", not ".5")
  function fmt_real(v, decimals) result(out)
    real(dp), intent(in) :: v
    integer, intent(in) :: decimals
    character(len=40) :: out, fmtstr
    write(fmtstr, '(a,i0,a)') '(f40.', decimals, ')'
    write(out, fmtstr) v
    out = adjustl(out)
    if (decimals == 0) then
       if (index(out, '.') > 0) out = out(1:index(out, '.') - 1)
    end if
  end function fmt_real

  function json_quote(text) result(out)
    character(len=*), intent(in) :: text
    character(len=2 * len(text) + 2) :: out
    integer :: i, k
    out = '"'
    k = 1
    do i = 1, len(text)
       if (text(i:i) == '"' .or. text(i:i) == '\') then
          out(k + 1:k + 1) = '\'
          k = k + 1
       end if
       out(k + 1:k + 1) = text(i:i)
       k = k + 1
    end do
    out(k + 1:k + 1) = '"'
  end function json_quote

end program btio_f
