! subarray.f90 -- Fortran 90 (use mpi) test of a 2-D subarray file view.
!
! The global integer array a(NX,NY) is block-decomposed over a 2-D process
! grid from MPI_Dims_create.  Each rank describes its block with
! MPI_Type_create_subarray(..., MPI_ORDER_FORTRAN, MPI_INTEGER, ...), sets it
! as the file view, writes its block with MPI_File_write_all, closes the file,
! reopens it, reads the block back with MPI_File_read_all and verifies it.
!
! a(i,j) = (j-1)*NX + (i-1) + OFFSET, so with OFFSET 0 the file holds the
! integers 0, 1, 2, ... in order (native 4-byte integers).
!
! usage: subarray FILE [NX [NY [both|write|read [OFFSET]]]]
!        defaults: NX 512, NY 384, both, OFFSET 0
! Reading with another OFFSET than the writer used must fail verification.
! FILE is passed unchanged to MPI_File_open.  Rank 0 prints one JSON line.
program subarray_f
  use mpi
  implicit none

  integer, parameter :: dp = kind(1.0d0)
  integer, parameter :: stderr = 0
  integer :: ierr, rank, nprocs, nargs, d, base, rem, i, j, nvals, got
  integer :: nx, ny, offset, fh, filetype, amode
  integer :: dims(2), coords(2), gsizes(2), subsizes(2), starts(2)
  integer :: status(MPI_STATUS_SIZE)
  integer(kind=MPI_OFFSET_KIND) :: disp
  integer :: errors, total_errors, expect
  logical :: do_write, do_read
  character(len=4096) :: path
  character(len=64) :: arg, mode
  integer, allocatable :: a(:,:)
  real(dp) :: t0, wtime, rtime, bytes
  character(len=9000) :: line

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)

  nx = 512
  ny = 384
  offset = 0
  mode = 'both'
  nargs = command_argument_count()
  if (nargs >= 1) call get_command_argument(1, path)
  if (nargs < 1 .or. path == '--help' .or. path == '-h') then
     if (rank == 0) then
        write(*,'(a)') 'usage: subarray FILE [NX [NY [both|write|read [OFFSET]]]]'
        write(*,'(a)') '  FILE is passed unchanged to MPI_File_open (e.g. stripefs:/dir/file)'
        write(*,'(a)') '  NX NY   global integer array size (default 512 384)'
        write(*,'(a)') '  mode    both (default), write or read'
        write(*,'(a)') '  OFFSET  added to every value (default 0); a reader with another'
        write(*,'(a)') '          OFFSET than the writer must fail verification'
     end if
     call MPI_Finalize(ierr)
     if (nargs < 1) stop 2
     stop
  end if
  if (nargs >= 2) then
     call get_command_argument(2, arg)
     nx = parse_int(arg, 'NX', 1)
  end if
  if (nargs >= 3) then
     call get_command_argument(3, arg)
     ny = parse_int(arg, 'NY', 1)
  end if
  if (nargs >= 4) call get_command_argument(4, mode)
  if (nargs >= 5) then
     call get_command_argument(5, arg)
     offset = parse_int(arg, 'OFFSET', 0)
  end if
  if (nargs > 5) call usage_fail('too many arguments')
  if (mode /= 'both' .and. mode /= 'write' .and. mode /= 'read') call usage_fail('bad mode '//trim(mode))
  do_write = (mode /= 'read')
  do_read = (mode /= 'write')

  dims = 0
  call MPI_Dims_create(nprocs, 2, dims, ierr)
  call check(ierr, 'MPI_Dims_create')
  if (dims(1) > nx .or. dims(2) > ny) call usage_fail('array too small for the process grid')
  ! column-major rank placement: dims(1) splits i, dims(2) splits j
  coords(1) = mod(rank, dims(1))
  coords(2) = rank / dims(1)
  gsizes = (/ nx, ny /)
  do d = 1, 2
     base = gsizes(d) / dims(d)
     rem = mod(gsizes(d), dims(d))
     if (coords(d) < rem) then
        subsizes(d) = base + 1
        starts(d) = coords(d) * (base + 1)
     else
        subsizes(d) = base
        starts(d) = coords(d) * base + rem
     end if
  end do
  nvals = subsizes(1) * subsizes(2)
  allocate(a(subsizes(1), subsizes(2)))

  call MPI_Type_create_subarray(2, gsizes, subsizes, starts, MPI_ORDER_FORTRAN, &
       MPI_INTEGER, filetype, ierr)
  call check(ierr, 'MPI_Type_create_subarray')
  call MPI_Type_commit(filetype, ierr)
  call check(ierr, 'MPI_Type_commit')
  call MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN, ierr)
  call check(ierr, 'MPI_File_set_errhandler(MPI_FILE_NULL)')

  disp = 0
  bytes = real(nx, dp) * real(ny, dp) * 4.0_dp
  wtime = 0.0_dp
  rtime = 0.0_dp
  errors = 0

  if (do_write) then
     do j = 1, subsizes(2)
        do i = 1, subsizes(1)
           a(i, j) = (starts(2) + j - 1) * nx + (starts(1) + i - 1) + offset
        end do
     end do
     amode = ior(MPI_MODE_CREATE, MPI_MODE_WRONLY)
     call MPI_File_open(MPI_COMM_WORLD, trim(path), amode, MPI_INFO_NULL, fh, ierr)
     call check(ierr, 'MPI_File_open("'//trim(path)//'") for writing')
     call MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN, ierr)
     call check(ierr, 'MPI_File_set_errhandler')
     call MPI_File_set_view(fh, disp, MPI_INTEGER, filetype, 'native', MPI_INFO_NULL, ierr)
     call check(ierr, 'MPI_File_set_view')
     call MPI_Barrier(MPI_COMM_WORLD, ierr)
     call check(ierr, 'MPI_Barrier')
     t0 = MPI_Wtime()
     call MPI_File_write_all(fh, a, nvals, MPI_INTEGER, status, ierr)
     call check(ierr, 'MPI_File_write_all')
     call check_count('MPI_File_write_all')
     call MPI_File_sync(fh, ierr)
     call check(ierr, 'MPI_File_sync')
     call MPI_Barrier(MPI_COMM_WORLD, ierr)
     call check(ierr, 'MPI_Barrier')
     wtime = MPI_Wtime() - t0
     call MPI_File_close(fh, ierr)
     call check(ierr, 'MPI_File_close')
  end if

  if (do_read) then
     a = -1
     call MPI_File_open(MPI_COMM_WORLD, trim(path), MPI_MODE_RDONLY, MPI_INFO_NULL, fh, ierr)
     call check(ierr, 'MPI_File_open("'//trim(path)//'") for reading')
     call MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN, ierr)
     call check(ierr, 'MPI_File_set_errhandler')
     call MPI_File_set_view(fh, disp, MPI_INTEGER, filetype, 'native', MPI_INFO_NULL, ierr)
     call check(ierr, 'MPI_File_set_view')
     call MPI_Barrier(MPI_COMM_WORLD, ierr)
     call check(ierr, 'MPI_Barrier')
     t0 = MPI_Wtime()
     call MPI_File_read_all(fh, a, nvals, MPI_INTEGER, status, ierr)
     call check(ierr, 'MPI_File_read_all')
     call check_count('MPI_File_read_all (short read / EOF?)')
     call MPI_Barrier(MPI_COMM_WORLD, ierr)
     call check(ierr, 'MPI_Barrier')
     rtime = MPI_Wtime() - t0
     call MPI_File_close(fh, ierr)
     call check(ierr, 'MPI_File_close')
     do j = 1, subsizes(2)
        do i = 1, subsizes(1)
           expect = (starts(2) + j - 1) * nx + (starts(1) + i - 1) + offset
           if (a(i, j) /= expect) then
              if (errors == 0) write(stderr,'(a,i0,a,i0,a,i0,a,i0,a,i0)') 'subarray.f90: rank ', &
                   rank, ': VERIFY FAILED at global (', starts(1) + i, ',', starts(2) + j, &
                   '): expected ', expect, ' got ', a(i, j)
              errors = errors + 1
           end if
        end do
     end do
     if (errors /= 0) write(stderr,'(a,i0,a,i0,a,i0,a)') 'subarray.f90: rank ', rank, ': ', &
          errors, ' of ', nvals, ' values wrong'
  end if

  call MPI_Allreduce(errors, total_errors, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(ierr, 'MPI_Allreduce')
  call MPI_Type_free(filetype, ierr)
  call check(ierr, 'MPI_Type_free')
  deallocate(a)

  if (rank == 0) then
     if (total_errors /= 0) then
        write(stderr,'(a,i0,a)') 'subarray.f90: FAILED: ', total_errors, ' values wrong'
     else
        write(line,'(a,a,a,i0,a,i0,a,i0,a,i0,a,i0,a,a,a,i0,a,a)') &
             '{"program":"subarray.f90","status":"OK","path":', trim(json_quote(trim(path))), &
             ',"nprocs":', nprocs, ',"nx":', nx, ',"ny":', ny, ',"dims":[', dims(1), ',', &
             dims(2), '],"mode":"', trim(mode), '","offset":', offset, ',"bytes":', &
             trim(fmt_real(bytes, 0))
        if (do_write) line = trim(line)//',"write_s":'//trim(fmt_real(wtime, 6))// &
             ',"write_mib_s":'//trim(fmt_real(mibs(bytes, wtime), 2))
        if (do_read) line = trim(line)//',"read_s":'//trim(fmt_real(rtime, 6))// &
             ',"read_mib_s":'//trim(fmt_real(mibs(bytes, rtime), 2))//',"verified":true'
        write(*,'(a)') trim(line)//'}'
     end if
  end if
  call MPI_Finalize(ierr)
  if (total_errors /= 0) stop 1

contains

  subroutine check(rc, what)
    integer, intent(in) :: rc
    character(len=*), intent(in) :: what
    character(len=MPI_MAX_ERROR_STRING) :: msg
    integer :: mlen, ierr2
    if (rc /= MPI_SUCCESS) then
       call MPI_Error_string(rc, msg, mlen, ierr2)
       write(stderr,'(a,i0,a,a,a,a)') 'subarray.f90: rank ', rank, ': ', what, ' failed: ', &
            msg(1:mlen)
       call MPI_Abort(MPI_COMM_WORLD, 2, ierr2)
       stop 2
    end if
  end subroutine check

  subroutine check_count(what)
    character(len=*), intent(in) :: what
    integer :: ierr2
    call MPI_Get_count(status, MPI_INTEGER, got, ierr2)
    call check(ierr2, 'MPI_Get_count')
    if (got /= nvals) then
       write(stderr,'(a,i0,a,a,a,i0,a,i0)') 'subarray.f90: rank ', rank, ': ', what, &
            ' transferred ', got, ' values, expected ', nvals
       call MPI_Abort(MPI_COMM_WORLD, 2, ierr2)
       stop 2
    end if
  end subroutine check_count

  subroutine usage_fail(msg)
    character(len=*), intent(in) :: msg
    integer :: ierr2
    if (rank == 0) write(stderr,'(a,a,a)') 'subarray.f90: ', msg, ' (try --help)'
    call MPI_Finalize(ierr2)
    stop 2
  end subroutine usage_fail

  integer function parse_int(text, what, lo)
    character(len=*), intent(in) :: text, what
    integer, intent(in) :: lo
    integer :: ios
    read(text, *, iostat=ios) parse_int
    if (ios /= 0 .or. parse_int < lo) call usage_fail('bad '//what//' value '//trim(text))
  end function parse_int

  real(dp) function mibs(nbytes, secs)
    real(dp), intent(in) :: nbytes, secs
    if (secs > 0.0_dp) then
       mibs = nbytes / 1048576.0_dp / secs
    else
       mibs = 0.0_dp
    end if
  end function mibs

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
    integer :: k, m
    out = '"'
    k = 1
    do m = 1, len(text)
       if (text(m:m) == '"' .or. text(m:m) == '\') then
          out(k + 1:k + 1) = '\'
          k = k + 1
       end if
       out(k + 1:k + 1) = text(m:m)
       k = k + 1
    end do
    out(k + 1:k + 1) = '"'
  end function json_quote

end program subarray_f
